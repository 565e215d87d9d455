"""The memcached servers: the wire's raw limit, reads per key as the servers saw them, one
server of three failing, and a server added to the ring and taken away."""
