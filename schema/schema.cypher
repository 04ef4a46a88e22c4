// Maxy memory graph schema — the single source of truth for constraints and indexes.
//
// Applied by the engine at every start (`maxy engine`), statement by statement, as Cypher 25.
// Every statement is idempotent (IF NOT EXISTS), so a second application changes nothing.
// $dimension is bound to the embedding model's dimension (384 for the development model,
// all-MiniLM-L6-v2; 768 for nomic-embed-text-v1.5 on the device). An existing vector index with
// another dimension is reported, not silently kept: `maxy engine --rebuild-vector-indexes`.
//
// The engine discovers vector indexes at runtime (SHOW VECTOR INDEXES): adding a label's index
// here makes that label searchable without code changes. Each vector index carries accountId as
// an in-index filter property so `SEARCH … WHERE n.accountId = $account` filters inside the index.

// ── Uniqueness: every node Maxy writes has a globally unique id ───────────────────────────────

CREATE CONSTRAINT question_id_unique IF NOT EXISTS FOR (n:Question) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT defined_term_id_unique IF NOT EXISTS FOR (n:DefinedTerm) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT review_id_unique IF NOT EXISTS FOR (n:Review) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT service_id_unique IF NOT EXISTS FOR (n:Service) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT person_id_unique IF NOT EXISTS FOR (n:Person) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT local_business_id_unique IF NOT EXISTS FOR (n:LocalBusiness) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT price_specification_id_unique IF NOT EXISTS FOR (n:PriceSpecification) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT task_id_unique IF NOT EXISTS FOR (n:Task) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT creative_work_id_unique IF NOT EXISTS FOR (n:CreativeWork) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT digital_document_id_unique IF NOT EXISTS FOR (n:DigitalDocument) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT knowledge_document_id_unique IF NOT EXISTS FOR (n:KnowledgeDocument) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT section_id_unique IF NOT EXISTS FOR (n:Section) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT chunk_id_unique IF NOT EXISTS FOR (n:Chunk) REQUIRE n.id IS UNIQUE;
// A KnowledgeDocument's earlier texts (appliance/memory/versions.py): no embedding, not searched.
CREATE CONSTRAINT document_version_id_unique IF NOT EXISTS FOR (n:DocumentVersion) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT conversation_id_unique IF NOT EXISTS FOR (n:Conversation) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT message_id_unique IF NOT EXISTS FOR (n:Message) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT event_id_unique IF NOT EXISTS FOR (n:Event) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT workflow_id_unique IF NOT EXISTS FOR (n:Workflow) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT preference_id_unique IF NOT EXISTS FOR (n:Preference) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT report_id_unique IF NOT EXISTS FOR (n:Report) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT account_id_unique IF NOT EXISTS FOR (n:Account) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT user_profile_id_unique IF NOT EXISTS FOR (n:UserProfile) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT organization_id_unique IF NOT EXISTS FOR (n:Organization) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT place_id_unique IF NOT EXISTS FOR (n:Place) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT postal_address_id_unique IF NOT EXISTS FOR (n:PostalAddress) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT contact_point_id_unique IF NOT EXISTS FOR (n:ContactPoint) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT product_id_unique IF NOT EXISTS FOR (n:Product) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT offer_id_unique IF NOT EXISTS FOR (n:Offer) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT brand_id_unique IF NOT EXISTS FOR (n:Brand) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT answer_id_unique IF NOT EXISTS FOR (n:Answer) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT defined_term_set_id_unique IF NOT EXISTS FOR (n:DefinedTermSet) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT article_id_unique IF NOT EXISTS FOR (n:Article) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT web_page_id_unique IF NOT EXISTS FOR (n:WebPage) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT web_site_id_unique IF NOT EXISTS FOR (n:WebSite) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT email_message_id_unique IF NOT EXISTS FOR (n:EmailMessage) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT note_id_unique IF NOT EXISTS FOR (n:Note) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT project_id_unique IF NOT EXISTS FOR (n:Project) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT goal_id_unique IF NOT EXISTS FOR (n:Goal) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT instruction_id_unique IF NOT EXISTS FOR (n:Instruction) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT agent_id_unique IF NOT EXISTS FOR (n:Agent) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT skill_id_unique IF NOT EXISTS FOR (n:Skill) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT schedule_id_unique IF NOT EXISTS FOR (n:Schedule) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT invoice_id_unique IF NOT EXISTS FOR (n:Invoice) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT order_id_unique IF NOT EXISTS FOR (n:Order) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT cloudflare_tunnel_id_unique IF NOT EXISTS FOR (n:CloudflareTunnel) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT cloudflare_hostname_id_unique IF NOT EXISTS FOR (n:CloudflareHostname) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT tool_call_id_unique IF NOT EXISTS FOR (n:ToolCall) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT session_briefing_id_unique IF NOT EXISTS FOR (n:SessionBriefing) REQUIRE n.id IS UNIQUE;
// A review digest and the alerts of a review routine (written by memory-write when one runs).
CREATE CONSTRAINT review_digest_id_unique IF NOT EXISTS FOR (n:ReviewDigest) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT review_alert_id_unique IF NOT EXISTS FOR (n:ReviewAlert) REQUIRE n.id IS UNIQUE;
// The scheduling plugin's reminders (its events are Event nodes): appliance/memory/scheduling.py.
CREATE CONSTRAINT reminder_id_unique IF NOT EXISTS FOR (n:Reminder) REQUIRE n.id IS UNIQUE;
// The owner's work (appliance/memory/projects.py, tasks.py): a task's progress log and a
// project's history (phase changes, issues, delays).
CREATE CONSTRAINT progress_entry_id_unique IF NOT EXISTS FOR (n:ProgressEntry) REQUIRE n.id IS UNIQUE;
CREATE CONSTRAINT history_entry_id_unique IF NOT EXISTS FOR (n:HistoryEntry) REQUIRE n.id IS UNIQUE;

// Natural keys that writes MERGE on: unique per account, so concurrent first writes cannot race.
CREATE CONSTRAINT report_minute_key IF NOT EXISTS FOR (n:Report) REQUIRE (n.accountId, n.minuteKey) IS UNIQUE;
CREATE CONSTRAINT conversation_session_unique IF NOT EXISTS FOR (n:Conversation) REQUIRE (n.accountId, n.sessionId) IS UNIQUE;
// Where a message comes from (an admin transcript line's uuid, appliance/sessions/recorder.py):
// recorded once, however often the transcript is read. Visitors' messages carry none.
CREATE CONSTRAINT message_source_key IF NOT EXISTS FOR (n:Message) REQUIRE (n.accountId, n.sourceKey) IS UNIQUE;
// A contact's email, trimmed and lower-cased (appliance/memory/contacts.py); only the contact book
// sets it, so Person nodes written before it or without an email are not constrained.
// A channel message's delivery key (appliance/memory/channels.py): a redelivered update finds the
// row its first delivery made, however the two race.
CREATE CONSTRAINT channel_message_key IF NOT EXISTS FOR (n:ChannelMessage) REQUIRE (n.accountId, n.channelKey) IS UNIQUE;
CREATE CONSTRAINT person_email_key IF NOT EXISTS FOR (n:Person) REQUIRE (n.accountId, n.emailKey) IS UNIQUE;

// ── Account lookups: every read filters by accountId ──────────────────────────────────────────
CREATE INDEX question_account IF NOT EXISTS FOR (n:Question) ON (n.accountId);
CREATE INDEX defined_term_account IF NOT EXISTS FOR (n:DefinedTerm) ON (n.accountId);
CREATE INDEX review_account IF NOT EXISTS FOR (n:Review) ON (n.accountId);
CREATE INDEX service_account IF NOT EXISTS FOR (n:Service) ON (n.accountId);
CREATE INDEX person_account IF NOT EXISTS FOR (n:Person) ON (n.accountId);
CREATE INDEX local_business_account IF NOT EXISTS FOR (n:LocalBusiness) ON (n.accountId);
CREATE INDEX price_specification_account IF NOT EXISTS FOR (n:PriceSpecification) ON (n.accountId);
CREATE INDEX task_account IF NOT EXISTS FOR (n:Task) ON (n.accountId);
CREATE INDEX creative_work_account IF NOT EXISTS FOR (n:CreativeWork) ON (n.accountId);
CREATE INDEX digital_document_account IF NOT EXISTS FOR (n:DigitalDocument) ON (n.accountId);
CREATE INDEX knowledge_document_account IF NOT EXISTS FOR (n:KnowledgeDocument) ON (n.accountId);
CREATE INDEX section_account IF NOT EXISTS FOR (n:Section) ON (n.accountId);
CREATE INDEX chunk_account IF NOT EXISTS FOR (n:Chunk) ON (n.accountId);
CREATE INDEX document_version_account IF NOT EXISTS FOR (n:DocumentVersion) ON (n.accountId);
CREATE INDEX conversation_account IF NOT EXISTS FOR (n:Conversation) ON (n.accountId);
CREATE INDEX message_account IF NOT EXISTS FOR (n:Message) ON (n.accountId);
CREATE INDEX event_account IF NOT EXISTS FOR (n:Event) ON (n.accountId);
CREATE INDEX workflow_account IF NOT EXISTS FOR (n:Workflow) ON (n.accountId);
CREATE INDEX preference_account IF NOT EXISTS FOR (n:Preference) ON (n.accountId);
CREATE INDEX report_account IF NOT EXISTS FOR (n:Report) ON (n.accountId);
CREATE INDEX user_profile_account IF NOT EXISTS FOR (n:UserProfile) ON (n.accountId);
CREATE INDEX organization_account IF NOT EXISTS FOR (n:Organization) ON (n.accountId);
CREATE INDEX place_account IF NOT EXISTS FOR (n:Place) ON (n.accountId);
CREATE INDEX postal_address_account IF NOT EXISTS FOR (n:PostalAddress) ON (n.accountId);
CREATE INDEX contact_point_account IF NOT EXISTS FOR (n:ContactPoint) ON (n.accountId);
CREATE INDEX product_account IF NOT EXISTS FOR (n:Product) ON (n.accountId);
CREATE INDEX offer_account IF NOT EXISTS FOR (n:Offer) ON (n.accountId);
CREATE INDEX brand_account IF NOT EXISTS FOR (n:Brand) ON (n.accountId);
CREATE INDEX answer_account IF NOT EXISTS FOR (n:Answer) ON (n.accountId);
CREATE INDEX defined_term_set_account IF NOT EXISTS FOR (n:DefinedTermSet) ON (n.accountId);
CREATE INDEX article_account IF NOT EXISTS FOR (n:Article) ON (n.accountId);
CREATE INDEX web_page_account IF NOT EXISTS FOR (n:WebPage) ON (n.accountId);
CREATE INDEX web_site_account IF NOT EXISTS FOR (n:WebSite) ON (n.accountId);
CREATE INDEX email_message_account IF NOT EXISTS FOR (n:EmailMessage) ON (n.accountId);
CREATE INDEX note_account IF NOT EXISTS FOR (n:Note) ON (n.accountId);
CREATE INDEX project_account IF NOT EXISTS FOR (n:Project) ON (n.accountId);
CREATE INDEX goal_account IF NOT EXISTS FOR (n:Goal) ON (n.accountId);
CREATE INDEX instruction_account IF NOT EXISTS FOR (n:Instruction) ON (n.accountId);
CREATE INDEX agent_account IF NOT EXISTS FOR (n:Agent) ON (n.accountId);
CREATE INDEX skill_account IF NOT EXISTS FOR (n:Skill) ON (n.accountId);
CREATE INDEX schedule_account IF NOT EXISTS FOR (n:Schedule) ON (n.accountId);
CREATE INDEX invoice_account IF NOT EXISTS FOR (n:Invoice) ON (n.accountId);
CREATE INDEX order_account IF NOT EXISTS FOR (n:Order) ON (n.accountId);
CREATE INDEX cloudflare_tunnel_account IF NOT EXISTS FOR (n:CloudflareTunnel) ON (n.accountId);
CREATE INDEX cloudflare_hostname_account IF NOT EXISTS FOR (n:CloudflareHostname) ON (n.accountId);
CREATE INDEX tool_call_account IF NOT EXISTS FOR (n:ToolCall) ON (n.accountId);
CREATE INDEX session_briefing_latest IF NOT EXISTS FOR (n:SessionBriefing) ON (n.accountId, n.createdAt);
CREATE INDEX review_digest_account IF NOT EXISTS FOR (n:ReviewDigest) ON (n.accountId, n.createdAt);
CREATE INDEX review_alert_account IF NOT EXISTS FOR (n:ReviewAlert) ON (n.accountId, n.createdAt);
CREATE INDEX reminder_account IF NOT EXISTS FOR (n:Reminder) ON (n.accountId);
CREATE INDEX progress_entry_account IF NOT EXISTS FOR (n:ProgressEntry) ON (n.accountId);
CREATE INDEX history_entry_account IF NOT EXISTS FOR (n:HistoryEntry) ON (n.accountId);

// ── Lookups the write paths use ────────────────────────────────────────────────────────────────
CREATE INDEX knowledge_document_attachment IF NOT EXISTS FOR (n:KnowledgeDocument) ON (n.accountId, n.attachmentId);
CREATE INDEX chunk_content_hash IF NOT EXISTS FOR (n:Chunk) ON (n.accountId, n.contentHash);
CREATE INDEX report_title IF NOT EXISTS FOR (n:Report) ON (n.accountId, n.title);
// What is due next: the session manager's loop asks every half minute.
CREATE INDEX event_next_fire IF NOT EXISTS FOR (n:Event) ON (n.accountId, n.nextFireAt);
// Inbound channel messages still being handled: the channels role takes them up after a restart.
CREATE INDEX channel_message_state IF NOT EXISTS FOR (n:ChannelMessage) ON (n.accountId, n.state);
CREATE INDEX reminder_next_fire IF NOT EXISTS FOR (n:Reminder) ON (n.accountId, n.nextFireAt);
// The owner's tasks among the audit trail's (kind "owner" vs "audit"; appliance/memory/work.py).
// Visitors' conversations that went quiet, for the lead review (appliance/agents/leads.py).
CREATE INDEX conversation_last_message IF NOT EXISTS FOR (n:Conversation) ON (n.accountId, n.lastMessageAt);
CREATE INDEX task_kind IF NOT EXISTS FOR (n:Task) ON (n.accountId, n.kind);
// A session's task in progress, found at each durable tool call (write-back).
CREATE INDEX task_working_session IF NOT EXISTS FOR (n:Task) ON (n.accountId, n.workingSession);

// ── Vector indexes: one per indexed label, cosine, exact vectors (a home graph is small) ──────
CREATE VECTOR INDEX question_embedding IF NOT EXISTS FOR (n:Question) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX defined_term_embedding IF NOT EXISTS FOR (n:DefinedTerm) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX review_embedding IF NOT EXISTS FOR (n:Review) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX service_embedding IF NOT EXISTS FOR (n:Service) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX person_embedding IF NOT EXISTS FOR (n:Person) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX local_business_embedding IF NOT EXISTS FOR (n:LocalBusiness) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX price_specification_embedding IF NOT EXISTS FOR (n:PriceSpecification) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX task_embedding IF NOT EXISTS FOR (n:Task) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX creative_work_embedding IF NOT EXISTS FOR (n:CreativeWork) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX digital_document_embedding IF NOT EXISTS FOR (n:DigitalDocument) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX knowledge_document_embedding IF NOT EXISTS FOR (n:KnowledgeDocument) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX section_embedding IF NOT EXISTS FOR (n:Section) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX chunk_embedding IF NOT EXISTS FOR (n:Chunk) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX conversation_embedding IF NOT EXISTS FOR (n:Conversation) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX message_embedding IF NOT EXISTS FOR (n:Message) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX event_embedding IF NOT EXISTS FOR (n:Event) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX workflow_embedding IF NOT EXISTS FOR (n:Workflow) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX preference_embedding IF NOT EXISTS FOR (n:Preference) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX report_embedding IF NOT EXISTS FOR (n:Report) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};
CREATE VECTOR INDEX project_embedding IF NOT EXISTS FOR (n:Project) ON n.embedding WITH [n.accountId]
  OPTIONS {indexConfig: {`vector.dimensions`: $dimension, `vector.similarity_function`: 'cosine', `vector.quantization.type`: 'NONE'}};

// ── Keyword search: one full-text index over every operator-meaningful label ──────────────────
// The 'english' analyzer (Lucene's EnglishAnalyzer: standard tokens, possessives dropped, lower
// case, English stop words, Porter stemming), so "wings" finds "wing" and "the" ranks nothing.
// An existing index of another analyzer, labels or properties is dropped and created anew when
// the schema is applied (appliance/memory/schema.py), and Neo4j repopulates it in the background.
CREATE FULLTEXT INDEX entity_search IF NOT EXISTS
  FOR (n:Question|DefinedTerm|Review|Service|Person|LocalBusiness|PriceSpecification|Task|CreativeWork|DigitalDocument|KnowledgeDocument|Section|Chunk|Conversation|Message|Event|Workflow|Preference|Report|UserProfile|Organization|Place|PostalAddress|ContactPoint|Product|Offer|Brand|Answer|DefinedTermSet|Article|WebPage|WebSite|EmailMessage|Note|Project|Goal|Instruction|Agent|Skill|Schedule|Reminder|Invoice|Order)
  ON EACH [n.name, n.alternateName, n.firstName, n.lastName, n.givenName, n.familyName, n.title, n.headline, n.summary, n.description, n.body, n.bodyPreview, n.content, n.text, n.subject, n.email, n.telephone, n.keywords, n.compiledTruth, n.question, n.answer, n.instruction, n.url]
  OPTIONS {indexConfig: {`fulltext.analyzer`: 'english'}};
