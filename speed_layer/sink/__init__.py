"""The read keys: a committed micro-batch's counts written to the video-keyed keys the serving layer
reads (`sink`, `sink.lua`)."""
