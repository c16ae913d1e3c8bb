"""Package data: the model catalog (catalog.toml), installed as specchat.catalog_data."""
