"""rootcause: why is variant A slower than variant B, kernel by kernel, choice by choice."""
__version__ = "0.1.0"
