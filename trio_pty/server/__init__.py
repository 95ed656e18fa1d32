"""The trio I/O of `trio-pty serve`: the HTTP front, the WebSocket driver, the serve loop."""
