"""The follower graph: follow/unfollow ingest, follower list reads, contended unfollows and
cached follower counts."""
