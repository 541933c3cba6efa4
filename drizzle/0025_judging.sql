ALTER TABLE "subagent_batch_items" ADD COLUMN "review_state" text;--> statement-breakpoint
ALTER TABLE "subagent_batch_items" ADD COLUMN "review_note" text;--> statement-breakpoint
ALTER TABLE "subagent_batch_items" ADD COLUMN "reviewed_output" jsonb;--> statement-breakpoint
ALTER TABLE "subagent_batch_items" ADD COLUMN "reviewed_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "subagent_batch_items" ADD COLUMN "review_version" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "subagent_batch_items" ADD COLUMN "review_requested_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "subagent_batches" ADD COLUMN "variant_of" uuid;--> statement-breakpoint
CREATE INDEX "subagent_batch_items_review_pending_idx" ON "subagent_batch_items" USING btree ("review_requested_at","id") WHERE review_state = 'pending';--> statement-breakpoint
CREATE INDEX "subagent_batch_items_reviewed_idx" ON "subagent_batch_items" USING btree ("batch_id","position") WHERE review_state is not null;