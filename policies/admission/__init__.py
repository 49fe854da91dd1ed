"""Whether and how a request is admitted: token caps, the request plan, rate windows, the fair queue, output-length
prediction, and every refusal as data.
"""
