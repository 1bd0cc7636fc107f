"""``lookup.table``: the names of ``lookup.store.table`` (opening a table once), where they
were before the store had a room of its own."""

from lookup.store.table import (
    ENV_TABLE,
    SHIPPED_HINT,
    MemoryGroup,
    Surface,
    Table,
    TableError,
    default_table_path,
    from_arrays,
    from_rows,
    manifest_mismatches,
    open_store,
    open_table,
    read_verified,
    read_verified_listing,
    refusing,
    shipped_table,
    store_files,
)

__all__ = [
    "ENV_TABLE",
    "SHIPPED_HINT",
    "MemoryGroup",
    "Surface",
    "Table",
    "TableError",
    "default_table_path",
    "from_arrays",
    "from_rows",
    "manifest_mismatches",
    "open_store",
    "open_table",
    "read_verified",
    "read_verified_listing",
    "refusing",
    "shipped_table",
    "store_files",
]
