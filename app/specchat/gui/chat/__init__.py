"""The conversation: the session that streams and saves replies, the message column and how a
reply is rendered, the conversation list, the input box and the speculation toggle."""
