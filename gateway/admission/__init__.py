"""Per-tenant admission control: limits, token buckets, queues, fair scheduling, cost, deadlines."""
