"""Several regions (decision 0006): the components a region's counter commits (`regions`) and the
replicator that applies the other regions' components here (`replicator`)."""
