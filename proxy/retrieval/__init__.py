"""Context from the tenant's documents: embeddings, the vector store, micro-batching, the passage
cache, and the answer made of passages when the model cannot answer.
"""
