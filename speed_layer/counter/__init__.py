"""The counter: consumes the events topic a micro-batch at a time, judges each view (`judge`,
`windows`), applies it to its partition's state in the worker (`state_counter`, `state_plan`),
spreads hot videos over shards (`hot`, `handoff`), and writes what it applied (`stream`). `rebuild`
counts the Parquet log through the same counter after Redis lost the state."""
