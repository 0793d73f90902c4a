"""The Responses API's WebSocket mode at `/v1/responses` (and `/responses`): each `response.create`
runs the managed turn of `POST /v1/responses` in-process, its events sent as text frames."""
