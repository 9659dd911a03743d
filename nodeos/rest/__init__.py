"""The HTTPS REST endpoint (`/api/v1/...`): the daemon's API methods (nodeos/api/) over HTTPS,
with bearer tokens and an OpenAPI 3.1 document. Off unless `rest_listen` is set."""
