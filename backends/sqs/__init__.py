"""SQS + DynamoDB backend (``sqs://``): DynamoDB keeps state, SQS delivers hints."""

from backends.sqs.storage import SQSStorage

__all__ = ["SQSStorage"]
