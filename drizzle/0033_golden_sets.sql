CREATE TABLE "golden_set_items" (
	"set_id" uuid NOT NULL,
	"item_key" text NOT NULL,
	"added_in" integer NOT NULL,
	"replaced_in" integer,
	"input" text,
	"fields" jsonb,
	"expected" jsonb NOT NULL,
	"source_batch_id" uuid,
	"source_item_id" uuid,
	"decision" text,
	CONSTRAINT "golden_set_items_set_id_item_key_added_in_pk" PRIMARY KEY("set_id","item_key","added_in")
);
--> statement-breakpoint
CREATE TABLE "golden_set_versions" (
	"set_id" uuid NOT NULL,
	"version" integer NOT NULL,
	"items" integer NOT NULL,
	"source" jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "golden_set_versions_set_id_version_pk" PRIMARY KEY("set_id","version")
);
--> statement-breakpoint
CREATE TABLE "golden_sets" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"user_id" uuid NOT NULL,
	"name" text NOT NULL,
	"version" integer DEFAULT 1 NOT NULL,
	"items" integer DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "golden_set_items" ADD CONSTRAINT "golden_set_items_set_id_golden_sets_id_fk" FOREIGN KEY ("set_id") REFERENCES "public"."golden_sets"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "golden_set_versions" ADD CONSTRAINT "golden_set_versions_set_id_golden_sets_id_fk" FOREIGN KEY ("set_id") REFERENCES "public"."golden_sets"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "golden_sets" ADD CONSTRAINT "golden_sets_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "golden_set_items_current_uq" ON "golden_set_items" USING btree ("set_id","item_key") WHERE replaced_in is null;--> statement-breakpoint
CREATE INDEX "golden_sets_user_idx" ON "golden_sets" USING btree ("user_id","updated_at");