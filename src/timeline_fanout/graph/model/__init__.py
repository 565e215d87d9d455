"""The follower graph's types: edges and their changes, posts, what a list holds according to
the store (`Snapshot`), the edge store's contract (its roles and `EdgeStore`), and the names of
lists and of their cached items (`keys`). Everything else in `graph` builds on these."""
