"""What the `admin` role may do beyond writing: statistics, source listing, compaction, clearing."""
