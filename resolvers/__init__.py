"""Application logic: the recall engine, threads, messages, working memory. No GraphQL here."""
