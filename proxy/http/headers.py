"""The headers prefixgate reads from clients and adds to its answers (``x-prefixgate-*``)."""

RETRIEVAL = b"x-prefixgate-retrieval"  # from the client: "off", this request goes without added context
POOL = b"x-prefixgate-pool"  # from the client: the pool to use; in answers: the pool that took it
OVERFLOW = b"x-prefixgate-overflow"  # in answers: the pool that shed the request to the one that took it
