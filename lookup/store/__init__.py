"""Reading a published table: its manifest, a bounded zarr v3 reader and its codecs, the checks
every row passes before it answers, and signing (docs/tables.md, docs/trust.md)."""
