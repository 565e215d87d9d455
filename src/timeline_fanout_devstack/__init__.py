"""The local development stack: a Kafka broker (Apache Kafka from Maven Central, or Tansu), two
memcached servers and optionally FerretDB, on loopback ports, recorded in a state file that the
settings read. A tool for development, tests and benchmarks, never a production deployment."""
