"""The broker's consumer groups: how long a group is without a full assignment when a member
dies or joins, by protocol. (``bench/on_brokers.py`` runs any benchmark on both brokers.)"""
