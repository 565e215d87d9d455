"""The edge stores, the source of truth: SQLite embedded, MongoDB in production, both keeping
the `graph.model.edges.EdgeStore` contract (positioned, idempotent, commutative writes)."""
