ALTER TABLE "subagent_batch_item_attempts" ALTER COLUMN "started_at" DROP DEFAULT;--> statement-breakpoint
ALTER TABLE "subagent_batch_item_attempts" ALTER COLUMN "started_at" DROP NOT NULL;--> statement-breakpoint
ALTER TABLE "subagent_batch_item_attempts" ADD COLUMN "run_id" uuid;--> statement-breakpoint
ALTER TABLE "subagent_batch_item_attempts" ADD COLUMN "leased_at" timestamp with time zone DEFAULT now() NOT NULL;--> statement-breakpoint
ALTER TABLE "subagent_batch_items" ADD COLUMN "leased_at" timestamp with time zone;