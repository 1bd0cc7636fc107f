"""``lookup serve``: the HTTP service (Starlette app, process pools, shared rows) and its page
(docs/lookup.md, docs/page.md)."""
