"""The prompt's rewrite for the prefix cache: canonical text, volatile spans moved to the note, templates, the
cache salt, the stable prefix, and the Responses API's input as chat messages.
"""
