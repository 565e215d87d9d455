"""The token-list protocol in memcached: `+id`/`-id` tokens appended to a list (`tokens`), the
fence that lets a rebuild from the store never lose a concurrent append (`fencing`), what every
list shares (`token_lists`), and the two layouts: sharded follower/following lists behind an
index item (`sharded`) and capped home timelines (`capped`)."""
