"""`facestream serve`: the WebRTC server, its face library, its peers and its page.

The limits the command line offers are defined here, light to import: parsing
`facestream serve`'s arguments (and refusing a busy port) needs none of aiohttp or aiortc.
"""

# What `serve --codec` may ask to send back: a codec the browser offered, or its own first choice.
CODECS = ("vp8", "h264", "auto")
MAX_UPLOAD_PIXELS = 40_000_000  # uploads larger than this are refused from their header
# The connection limits' defaults (stream/server/guard.py applies them).
HEADER_TIMEOUT_S = 5.0
KEEPALIVE_TIMEOUT_S = 15.0
MAX_CONNECTIONS = 256
MAX_CONNECTIONS_PER_CLIENT = 64
