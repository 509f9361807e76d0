"""Intent: the only durable state (pins, jobs, drains). The pure model, the
drain rule, the SQLite store and the one service that changes it.
"""
