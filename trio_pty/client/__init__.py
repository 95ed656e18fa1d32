"""The client side of the wire: the async client and the router over many servers."""
