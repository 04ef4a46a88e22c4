"""Conversations with the models: the inbound gateway, the public agents, the Anthropic client.

anthropic_client  the async `anthropic` SDK behind one small interface; its errors translated once
patterns          the local prompt-injection vocabulary for short messages
gateway           screens every inbound message (verdict, intent, language, complexity)
public_agent      a visitor-facing agent: toolless, prompt from its folder, streamed replies
retrieval         the query classifier and the search engine's query expander
expansion         that expander, built for the engine only when an Anthropic key exists
recall            relevant memory for a visitor's message: classify, search as the agent, bound
visitors          a visitor's conversation with an agent: memory first, the graph from message 2
store             the agents' folders on disk and the owner's changes to them
knowledge         KNOWLEDGE.md regenerated from the graph (``maxy agents knowledge``)
"""
