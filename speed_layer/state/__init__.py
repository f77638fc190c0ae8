"""A partition's counting state in the counter worker: the tables (`partition`), their fixed-width
rows (`rows`, `seen`, `counted_views`), the snapshot built a chunk a batch (`snapshot`) and where it
all lives in Redis (`partition_store`, `commit.lua`)."""
