"""The Responses API's conversation state: stored responses, scoped to their tenant."""
