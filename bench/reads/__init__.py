"""Reads of timelines and pages: timeline pages through the client and the event loop, the HTTP
API under ``wrk``, follower pages, and home timelines of users following many."""
