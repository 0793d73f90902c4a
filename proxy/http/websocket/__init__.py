"""The Responses API's WebSocket mode at `/v1/responses` (and `/responses`): each `response.create`
is answered by the managed route of `POST /v1/responses`, called directly (no HTTP request), its
events sent as text frames."""
