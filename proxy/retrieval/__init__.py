"""Context from the tenant's documents: embeddings, the vector store, the passage cache, the context
step of a chat request, and the answer made of passages when the model cannot answer.
"""
