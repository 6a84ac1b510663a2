"""The one measuring pipeline and the commands built on it (table, tune, allocator report)."""
