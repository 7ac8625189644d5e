"""Conversations: follow-ups, clarification, sessions stored in SQLite (:mod:`ragkit.conversation.session`)."""
