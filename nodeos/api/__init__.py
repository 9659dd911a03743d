"""The daemon's API, defined once (issue 26): every public method's name, typed request and
reply, the errors it may return, where it runs and the version that introduced it
(`registry.METHODS`); the validation of a request from its type (`check.check_request`); the
reference in docs/api.md (`reference`). Importing this package imports msgspec but no storage
or cluster code: validators are named, and imported when a request first needs them."""
