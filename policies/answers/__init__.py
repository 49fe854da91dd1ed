"""What is kept of an answer: the answer cache's keys and rules, usage as the client is billed."""
