"""Reading Python imports: the per-file index, name resolution, the import check and the graph."""
