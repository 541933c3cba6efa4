export * from "./auth";
export * from "./batches";
export * from "./chat";
export * from "./runs";
export * from "./workers";
export * from "./rate-limits";
export * from "./chat-streams";
