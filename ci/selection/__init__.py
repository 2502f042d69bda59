"""Which tests a change selects and how a tier's tests are split into shards."""
