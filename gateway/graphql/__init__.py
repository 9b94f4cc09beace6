"""GraphQL transport: Strawberry types, inputs, resolvers, extensions, context. Transport only."""
