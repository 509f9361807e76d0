"""Railyard: a traffic-engineering controller for rail-optimized AI fabrics."""
