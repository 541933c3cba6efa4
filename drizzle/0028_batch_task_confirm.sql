ALTER TABLE "tool_approvals" ADD COLUMN "detail" jsonb;--> statement-breakpoint
ALTER TABLE "tool_approvals" ADD COLUMN "option" text;