"""A scripted MockChatGenerator for the agent tests: the n-th LLM call gets the n-th reply."""

from haystack.components.generators.chat import MockChatGenerator


def scripted(*replies):
    """The n-th LLM call gets the n-th reply (the last one repeats); the messages of each call are kept."""
    seen = []

    def respond(messages):
        seen.append(list(messages))
        return replies[min(len(seen), len(replies)) - 1]

    return MockChatGenerator(response_fn=respond), seen
