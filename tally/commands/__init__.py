"""The `tally` sub-commands, one module per group of commands; `tally.cli` registers them."""
