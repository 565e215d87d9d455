"""The HTTP API: timelines, follower lists and event publishing for apps that cannot import the
Python package or speak Kafka. Built on ``graph``, ``schemas`` and ``producers``; the CLI
(``fanout serve``, cli/api_server.py) wires it to settings, and nothing here imports the
CLI. The application is built by ``api.app.create_app``."""
