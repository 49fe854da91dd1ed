"""What a request is allowed to be: field checks for each endpoint, input limits, the types a check returns."""
