"""Prefix routing from what the engines hold: their KV-cache events, the index they feed, the prompt's
tokens as the engine will see them."""
