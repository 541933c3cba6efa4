CREATE TABLE "familiar_addresses" (
	"user_id" uuid NOT NULL,
	"address" text NOT NULL,
	"last_signed_in_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "familiar_addresses_user_id_address_pk" PRIMARY KEY("user_id","address")
);
--> statement-breakpoint
CREATE TABLE "setup_codes" (
	"only" boolean PRIMARY KEY DEFAULT true NOT NULL,
	"code" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "setup_codes_one_row" CHECK ("setup_codes"."only")
);
--> statement-breakpoint
ALTER TABLE "familiar_addresses" ADD CONSTRAINT "familiar_addresses_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;