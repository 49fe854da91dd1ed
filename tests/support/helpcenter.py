"""A help-center corpus for retrieval evaluation: 52 articles of a fictional product, Quillstack, each
wrapped in the same header, navigation and footer paragraphs, as help-center pages are.

Written to hold what makes retrieval hard in practice:
  * shared boilerplate: about half of each page's words are the same on every page;
  * near-duplicates: pairs of articles that differ in a few facts (web and mobile password reset, the
    integrations, the plans), and questions that only one of the pair answers;
  * keyword questions: an error code, a plan or product name, a number;
  * paraphrased questions: no content word in common with the article (``content_words`` checks it);
  * worded questions: short, in the article's own words ("How long is the free trial?").
Every question names the one article that answers it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

HEADER = (
    "Quillstack Help Center. Home > Support > Knowledge base. Welcome to the Quillstack Help Center, where you "
    "will find guides, answers and troubleshooting steps for every part of your workspace. Sign in to see the "
    "articles for your plan, or browse the most popular topics: getting started, account settings, billing, "
    "integrations and security."
)
NAVIGATION = (
    "Related articles: Getting started with Quillstack. Managing your workspace. Billing and plans overview. "
    "Security at Quillstack. Keyboard tips for power users."
)
FOOTER = (
    "Was this article helpful? If you still need help, our support team is available around the clock by chat "
    "and by email at help@quillstack.example. Enterprise customers can also call their dedicated account "
    "manager. Response times depend on your plan and are listed on the status page."
)
LEGAL = (
    "Copyright 2026 Quillstack Inc. All rights reserved. Terms of service. Privacy policy. Cookie settings. "
    "Accessibility statement. Quillstack is a registered trademark; product names and prices may change "
    "without notice."
)
BOILERPLATE = (HEADER, NAVIGATION, FOOTER, LEGAL)

CLASSES = ("worded", "keyword", "paraphrase")


@dataclass(frozen=True)
class Article:
    slug: str
    title: str
    body: tuple[str, ...]
    worded: tuple[str, ...]
    keyword: tuple[str, ...]
    paraphrase: tuple[str, ...]

    def page(self) -> str:
        """The page as the help center serves it: header, title, body, navigation, footer."""
        return "\n\n".join([HEADER, f"# {self.title}", *self.body, NAVIGATION, FOOTER, LEGAL])


def _a(slug: str, title: str, body: list[str], worded: list[str], keyword: list[str], paraphrase: list[str]) -> Article:
    return Article(slug, title, tuple(body), tuple(worded), tuple(keyword), tuple(paraphrase))


ARTICLES: list[Article] = [
    # Error codes
    _a(
        "error-qs-1001",
        "Error QS-1001: session expired",
        [
            "Error QS-1001 appears when your sign-in session has expired after 12 hours without activity.",
            "Sign in again to continue. Unsaved changes are kept in your browser and restored after you sign in.",
        ],
        ["What happens when my session expires?"],
        ["What does error QS-1001 mean?", "QS-1001 after 12 hours"],
        ["I was away from my desk all day and now it wants my credentials once more, why?"],
    ),
    _a(
        "error-qs-1002",
        "Error QS-1002: upload too large",
        [
            "Error QS-1002 means the file you tried to upload is larger than your plan allows.",
            "Starter workspaces accept files up to 100 MB, all other plans up to 5 GB. Compress the file or split it.",
        ],
        ["Why is my upload too large?"],
        ["How do I fix QS-1002?", "Starter 100 MB upload limit"],
        ["My video refuses to attach, it says the thing is too big for my subscription tier."],
    ),
    _a(
        "error-qs-1003",
        "Error QS-1003: document locked",
        [
            "Error QS-1003 is shown when another person is editing a locked section of the document.",
            "The lock is released when they close the section or after 10 minutes of inactivity.",
        ],
        ["Why is the document locked?"],
        ["QS-1003 error when editing"],
        [
            "A colleague seems to be blocking me from changing a part of the page, how long will it last?",
            "Someone else holds a part I want to change, when can I have it?",
        ],
    ),
    _a(
        "error-qs-1004",
        "Error QS-1004: storage quota reached",
        [
            "Error QS-1004 means your workspace has used all of its storage quota.",
            "Delete old files, empty the trash, or upgrade your plan to get more storage space.",
        ],
        ["What to do when the storage quota is reached?", "How do I get more storage space?"],
        ["Error QS-1004"],
        ["We ran out of room for our stuff, how can we clear some?"],
    ),
    _a(
        "error-qs-1005",
        "Error QS-1005: payment declined",
        [
            "Error QS-1005 appears when your bank declined the card payment for your subscription.",
            "Check the card's expiry date and billing address, or add another payment method within 7 days to "
            "avoid a downgrade.",
        ],
        ["Why was my payment declined?", "How do I avoid a downgrade after a declined card?"],
        ["QS-1005 payment"],
        ["The issuer refused the charge, how long before we lose our features?"],
    ),
    _a(
        "error-qs-1006",
        "Error QS-1006: link expired",
        [
            "Error QS-1006 is shown when you open a share link that has expired.",
            "Share links last 30 days by default. Ask the owner to create a new link or to extend the expiry.",
        ],
        ["Why did my share link expire?"],
        ["What is error QS-1006?", "share link 30 days"],
        ["Someone sent me a URL to a spreadsheet weeks ago and now it no longer opens."],
    ),
    _a(
        "error-qs-1007",
        "Error QS-1007: too many requests",
        [
            "Error QS-1007 is returned by the API when a key sends more requests than its rate limit allows.",
            "Wait for the number of seconds in the Retry-After header, then try again.",
        ],
        ["What does too many requests mean in the API?"],
        ["QS-1007 rate limit error", "Retry-After header"],
        ["My script gets throttled by your server, how long should it pause?"],
    ),
    _a(
        "error-qs-1008",
        "Error QS-1008: SSO certificate invalid",
        [
            "Error QS-1008 appears during single sign-on when the identity provider's certificate is invalid or "
            "has expired.",
            "An administrator must upload the new certificate under Settings > Security > SAML.",
        ],
        ["What to do when the SSO certificate is invalid?", "Where do I upload a new SAML certificate?"],
        ["QS-1008 SAML error"],
        ["Nobody in our company can log in through Okta since this morning, what needs renewing?"],
    ),
    _a(
        "error-qs-1009",
        "Error QS-1009: import failed",
        [
            "Error QS-1009 means an import stopped because the file format is not supported.",
            "Quillstack imports DOCX, Markdown, HTML and Google Docs files. Convert other formats first.",
        ],
        ["Why did my import fail?"],
        ["Error QS-1009 import", "import DOCX Markdown"],
        ["I tried to bring in a Pages document from my Mac and it was rejected, what kinds are accepted?"],
    ),
    _a(
        "error-qs-1010",
        "Error QS-1010: offline changes conflict",
        [
            "Error QS-1010 appears when changes you made offline conflict with changes made online by someone else.",
            "Both versions are kept: open version history to compare them and choose which one to keep.",
        ],
        ["What happens when offline changes conflict?", "How do I compare conflicting versions?"],
        ["QS-1010 conflict"],
        ["I edited on a plane and a coworker edited the same paragraph meanwhile, did I lose my work?"],
    ),
    _a(
        "error-qs-1011",
        "Error QS-1011: invitation expired",
        [
            "Error QS-1011 is shown when someone accepts a workspace invitation that has expired.",
            "Invitations are valid for 14 days. A workspace admin can send a fresh one from the Members page.",
        ],
        ["Why did my invitation expire?"],
        ["QS-1011", "invitation valid 14 days"],
        ["The message asking me to join my colleagues is two weeks old and no longer usable."],
    ),
    _a(
        "error-qs-1012",
        "Error QS-1012: webhook delivery failed",
        [
            "Error QS-1012 is recorded when a webhook could not be delivered to your endpoint.",
            "Quillstack retries a failed delivery 5 times over 24 hours, then disables the webhook and emails "
            "the owner.",
        ],
        ["What happens when webhook delivery fails?"],
        ["QS-1012 webhook", "webhook retries 5 times"],
        ["Our receiving server was down for a day, will the event notifications be sent again?"],
    ),
    # Plans
    _a(
        "plan-starter",
        "The Starter plan",
        [
            "The Starter plan is free for up to 3 members.",
            "It includes 2 GB of storage per workspace, 30 days of version history and community support.",
        ],
        ["What does the Starter plan include?"],
        ["Starter plan storage", "free plan 3 members"],
        ["Is there a no-cost option for a tiny team of three people?"],
    ),
    _a(
        "plan-team",
        "The Team plan",
        [
            "The Team plan costs 8 dollars per member per month, billed yearly, or 10 dollars billed monthly.",
            "It includes 100 GB of storage per workspace, 1 year of version history and email support.",
        ],
        ["How much is the Team plan?"],
        ["Team plan price per member"],
        [
            "What would it cost us for each colleague on the mid-tier subscription?",
            "What is the annual charge for every colleague on the middle tier?",
        ],
    ),
    _a(
        "plan-business",
        "The Business plan",
        [
            "The Business plan costs 15 dollars per member per month, billed yearly.",
            "It adds single sign-on, audit logs, 1 TB of storage per workspace and unlimited version history.",
        ],
        ["What does the Business plan add?"],
        ["Business plan audit logs", "1 TB Business"],
        ["Which tier gives us Okta login and a record of who did what?"],
    ),
    _a(
        "plan-enterprise",
        "The Enterprise plan",
        [
            "The Enterprise plan has custom pricing for organizations with more than 250 members.",
            "It adds data residency in the EU or US, a 99.95 percent uptime agreement and a dedicated account manager.",
        ],
        ["What is the Enterprise plan?"],
        ["Enterprise plan uptime SLA 99.95", "more than 250 members"],
        ["Can a big company keep all of its information stored inside Europe?"],
    ),
    _a(
        "plan-nonprofit",
        "The Nonprofit plan",
        [
            "Registered nonprofits and schools get the Team plan at a 60 percent discount.",
            "Apply with proof of your charitable status; reviews take about 5 business days.",
        ],
        ["Is there a nonprofit discount?", "How do schools apply for the discount?"],
        ["Nonprofit plan 60 percent"],
        ["We are a foundation doing good works, can we pay less and how long until approval?"],
    ),
    # Integrations (near-duplicates)
    _a(
        "integration-slack",
        "Connect Quillstack to Slack",
        [
            "Open Settings > Integrations, choose Slack and sign in to your Slack workspace.",
            "Pick a channel: Quillstack posts there when a document is shared, commented on or mentions you.",
        ],
        ["How do I connect Slack?", "Which Slack channel does Quillstack post to?"],
        ["Slack integration channel"],
        ["Can our chat tool with the hashtag rooms ping us when a teammate leaves a remark?"],
    ),
    _a(
        "integration-teams",
        "Connect Quillstack to Microsoft Teams",
        [
            "Open Settings > Integrations, choose Microsoft Teams and sign in with a Microsoft 365 admin account.",
            "Quillstack adds a tab to your team so documents open inside Teams, and sends notifications to a "
            "chosen channel.",
        ],
        ["How do I connect Microsoft Teams?"],
        ["Microsoft 365 Teams tab"],
        [
            "Can our pages be viewed within the Redmond company's chat app?",
            "Which permissions must my colleague have to link our workspace with the Redmond chat product?",
        ],
    ),
    _a(
        "integration-jira",
        "Connect Quillstack to Jira",
        [
            "Open Settings > Integrations, choose Jira and authorize your Atlassian site.",
            "Paste a Jira issue link into a document to show its status, assignee and priority as a live card.",
        ],
        ["How do I connect Jira?", "How do I show a Jira issue in a document?"],
        ["Jira issue link card"],
        ["Will a ticket from our bug tracker display who owns it when I drop its URL in a page?"],
    ),
    _a(
        "integration-github",
        "Connect Quillstack to GitHub",
        [
            "Open Settings > Integrations, choose GitHub and install the Quillstack app on your organization.",
            "Pull request links in documents show their review state, and documents can be exported to a "
            "repository as Markdown.",
        ],
        ["How do I connect GitHub?"],
        ["GitHub pull request status", "export to GitHub repository"],
        ["Can I push our specs as text files into a code repo?"],
    ),
    _a(
        "integration-drive",
        "Connect Quillstack to Google Drive",
        [
            "Open Settings > Integrations, choose Google Drive and sign in with your Google account.",
            "You can embed Drive files in documents and import Google Docs with their comments.",
        ],
        ["How do I connect Google Drive?", "How do I embed Google Drive files?"],
        ["Google Docs import with comments"],
        ["Can we bring in stuff from the search giant's cloud folders and keep the remarks on it?"],
    ),
    _a(
        "integration-dropbox",
        "Connect Quillstack to Dropbox",
        [
            "Open Settings > Integrations, choose Dropbox and sign in to your Dropbox account.",
            "You can embed Dropbox files in documents; previews update when the file changes in Dropbox.",
        ],
        ["How do I connect Dropbox?"],
        ["Dropbox file preview", "Dropbox embed"],
        ["If a colleague edits a spreadsheet in our box-shaped cloud folder, does the copy in my page refresh?"],
    ),
    _a(
        "integration-salesforce",
        "Connect Quillstack to Salesforce",
        [
            "The Salesforce integration is available on the Business and Enterprise plans.",
            "Link a document to an account or opportunity record, and it appears in the record's Quillstack panel.",
        ],
        ["How do I connect Salesforce?", "Which plans include the Salesforce integration?"],
        ["Salesforce opportunity record"],
        ["Can our reps attach pages to a CRM deal, and which tiers allow it?"],
    ),
    _a(
        "integration-zapier",
        "Connect Quillstack to Zapier",
        [
            "Search for Quillstack in Zapier and connect it with an API key.",
            "Triggers include new document, new comment and new member; actions include create document and "
            "add comment.",
        ],
        ["How do I connect Zapier?"],
        ["Zapier triggers and actions", "Zapier API key"],
        ["Can automation recipes fire whenever somebody joins our workspace?"],
    ),
    # Account and billing
    _a(
        "password-reset-web",
        "Reset your password on the web",
        [
            "On the sign-in page, click Forgot password and enter your email address.",
            "We send a reset link that is valid for 1 hour. The new password must have at least 12 characters.",
        ],
        ["How do I reset my password on the web?", "How long is the password reset link valid?"],
        ["Forgot password link valid 1 hour"],
        ["I can't remember my secret phrase for the browser version, what now?"],
    ),
    _a(
        "password-reset-mobile",
        "Reset your password in the mobile app",
        [
            "In the iOS or Android app, tap Trouble signing in, then Reset password.",
            "We send a 6-digit code by email that is valid for 15 minutes; enter it in the app to choose a new "
            "password.",
        ],
        ["How do I reset my password in the mobile app?", "How long is the reset code valid in the app?"],
        ["6-digit reset code iOS Android"],
        ["On my phone I can't remember my secret phrase, what do I do?"],
    ),
    _a(
        "two-factor",
        "Turn on two-factor authentication",
        [
            "Go to Profile > Security and choose Two-factor authentication.",
            "Scan the QR code with an authenticator app, then save the 10 backup codes somewhere safe.",
        ],
        ["How do I turn on two-factor authentication?"],
        ["2FA backup codes", "authenticator app QR code"],
        ["How can I add a second step to logging in using my phone?"],
    ),
    _a(
        "sso-saml",
        "Set up single sign-on with SAML",
        [
            "Single sign-on is available on the Business and Enterprise plans.",
            "Under Settings > Security > SAML, enter your identity provider's metadata URL; Okta, Azure AD and "
            "Google Workspace are supported.",
        ],
        ["How do I set up single sign-on?"],
        ["SAML Okta Azure AD", "SAML metadata URL"],
        ["Can employees log in with the corporate directory account instead of a separate credential?"],
    ),
    _a(
        "change-email",
        "Change your email address",
        [
            "Go to Profile > Account and choose Change email.",
            "We send a confirmation to the new address; the change takes effect once you click the link in it.",
        ],
        ["How do I change my email address?"],
        ["Change email confirmation", "Profile > Account change email"],
        ["I got a different work inbox, how do I update where messages arrive?"],
    ),
    _a(
        "delete-account",
        "Delete your account",
        [
            "Go to Profile > Account and choose Delete account. Workspace owners must first transfer ownership.",
            "Your data is removed permanently after a 30-day grace period, during which you can cancel the deletion.",
        ],
        ["How do I delete my account?", "Can I cancel the deletion of my account?"],
        ["Delete account 30-day grace period"],
        ["I want to leave for good and erase everything about me, is there a way to undo it?"],
    ),
    _a(
        "free-trial",
        "The free trial",
        [
            "Every new workspace gets a 14-day free trial of the Business plan, with no credit card required.",
            "When the trial ends the workspace moves to the Starter plan unless you subscribe.",
        ],
        ["How long is the free trial?"],
        ["14-day trial Business plan", "trial no credit card"],
        ["Can I test the premium features for a couple of weeks before paying anything?"],
    ),
    _a(
        "cancel-subscription",
        "Cancel your subscription",
        [
            "Owners can cancel under Settings > Billing > Cancel subscription.",
            "You keep paid features until the end of the current billing period; the workspace then moves to Starter.",
        ],
        ["How do I cancel my subscription?", "What happens when I cancel my subscription?"],
        ["Cancel subscription billing period"],
        ["We want to stop paying, how long do the extras remain?"],
    ),
    _a(
        "refunds",
        "Refunds",
        [
            "Yearly subscriptions can be refunded in full within 30 days of purchase.",
            "Monthly subscriptions are not refunded, but you can cancel at any time. Contact billing to request "
            "a refund.",
        ],
        ["Can I get a refund?"],
        ["Refund yearly subscription 30 days", "monthly subscription refund"],
        ["We bought an annual package by mistake last week, is our money returned?"],
    ),
    _a(
        "invoices",
        "Download invoices",
        [
            "Owners and billing admins find every invoice under Settings > Billing > Invoices as PDF.",
            "Invoices are also emailed to the billing contact on the day each payment is taken.",
        ],
        ["Where can I download invoices?", "Who receives invoices by email?"],
        ["Invoice PDF billing admin"],
        ["Accounting needs the receipts for what we paid, where are they?"],
    ),
    _a(
        "vat",
        "VAT and tax IDs",
        [
            "Add your VAT number under Settings > Billing > Tax ID to be invoiced without VAT in the EU "
            "reverse-charge scheme.",
            "Customers in other countries are charged sales tax where required.",
        ],
        ["How do I add a VAT number?"],
        ["VAT reverse-charge EU", "sales tax outside EU"],
        ["As a European business, how do we avoid paying the added-value levy?"],
    ),
    _a(
        "payment-methods",
        "Payment methods",
        [
            "Quillstack accepts Visa, Mastercard and American Express cards, and SEPA direct debit in the EU.",
            "Yearly plans over 5,000 dollars can also pay by bank transfer against an invoice.",
        ],
        ["What payment methods are accepted?", "Can I pay by bank transfer?"],
        ["SEPA direct debit American Express"],
        ["Can a large annual order be settled by wire rather than plastic?"],
    ),
    _a(
        "add-members",
        "Add members to a workspace",
        [
            "Admins invite people from the Members page by email or by sharing an invite link.",
            "Each new member is added to your bill from the day they join, prorated for the billing period.",
        ],
        ["How do I add members to a workspace?"],
        ["Invite link Members page", "prorated new member"],
        ["How do I bring coworkers aboard, and when are we charged for them?"],
    ),
    _a(
        "roles",
        "Roles and permissions",
        [
            "A workspace has four roles: owner, admin, member and guest.",
            "Guests see only the documents shared with them and cannot create new ones; they are free on every plan.",
        ],
        ["What roles and permissions are there?", "What can guests do?"],
        ["Guest role free"],
        ["Do outside contractors who merely read a few pages cost us anything?"],
    ),
    _a(
        "data-export",
        "Export your workspace data",
        [
            "Owners can export the whole workspace under Settings > Export as a ZIP of Markdown and HTML files.",
            "Large exports are prepared in the background; we email a download link valid for 7 days.",
        ],
        ["How do I export my workspace data?", "How long is the export download link valid?"],
        ["Export ZIP Markdown HTML"],
        ["We are leaving, how do we take all our content with us?"],
    ),
    # Features and limits
    _a(
        "upload-limits",
        "File upload limits",
        [
            "You can attach any file type to a document. Images are shown inline and PDFs get a preview.",
            "Up to 20 files can be uploaded at once by dragging them onto the page.",
        ],
        ["What are the file upload limits?", "Can I upload a PDF and see a preview?"],
        ["Upload 20 files at once"],
        ["How many items can I drop in one go?"],
    ),
    _a(
        "version-history",
        "Version history",
        [
            "Every change is saved automatically. Open the clock icon to see earlier versions of a document.",
            "You can restore any version or copy a part of it; how far back you can go depends on your plan.",
        ],
        ["How does version history work?"],
        ["Restore an earlier version", "clock icon versions"],
        ["I deleted a paragraph yesterday by accident, can I undo that?"],
    ),
    _a(
        "offline-mode",
        "Work offline",
        [
            "The desktop and mobile apps keep recent documents available offline.",
            "Edits made offline sync when you reconnect. The web app needs a connection.",
        ],
        ["Can I work offline?", "Does the web app work offline?"],
        ["Offline sync desktop app"],
        ["Will I be able to write on a flight with no internet?"],
    ),
    _a(
        "api-rate-limits",
        "API rate limits",
        [
            "Each API key may send 600 requests per minute on the Team plan and 3,000 on Business and Enterprise.",
            "Responses include X-RateLimit-Remaining so you can pace your calls.",
        ],
        ["What are the API rate limits?"],
        ["600 requests per minute API", "X-RateLimit-Remaining"],
        ["How often can our integration hit you before being slowed down?"],
    ),
    _a(
        "api-keys",
        "Create API keys",
        [
            "Admins create API keys under Settings > Developers > API keys.",
            "A key is shown once when created; store it securely. Keys can be scoped to read-only access and "
            "revoked at any time.",
        ],
        ["How do I create API keys?", "How do I revoke an API key?"],
        ["Read-only API key scope"],
        ["Where do I generate a token for our scripts, and can it be limited to viewing?"],
    ),
    _a(
        "webhooks",
        "Webhooks",
        [
            "Webhooks send an HTTPS POST to your endpoint when documents are created, changed or deleted.",
            "Each delivery is signed with HMAC-SHA256 in the X-Quillstack-Signature header.",
        ],
        ["How do webhooks work?", "When are webhooks sent?"],
        ["X-Quillstack-Signature HMAC-SHA256"],
        ["How can our server verify that an event notification really came from you?"],
    ),
    _a(
        "trash",
        "Trash and data retention",
        [
            "Deleted documents stay in the trash for 30 days, then are removed for good.",
            "Admins can restore items from the trash or empty it early.",
        ],
        ["How long do deleted documents stay in the trash?", "Can admins empty the trash early?"],
        ["Trash 30 days restore"],
        ["I threw out a page by mistake two weeks ago, is it gone forever?"],
    ),
    _a(
        "mentions",
        "Comments and mentions",
        [
            "Select text and press the comment button to start a thread; type @ followed by a name to mention someone.",
            "Mentioned people get a notification and an email digest if they do not read it within an hour.",
        ],
        ["How do comments and mentions work?"],
        ["@ mention notification digest"],
        [
            "How do I get a teammate's attention on a particular sentence?",
            "If a coworker tags me and I ignore it, will I also hear about it in my inbox?",
        ],
    ),
    _a(
        "templates",
        "Document templates",
        [
            "Start a document from a template in the New menu: meeting notes, project brief, weekly report and more.",
            "Admins can publish workspace templates that every member sees first.",
        ],
        ["How do I use document templates?"],
        ["Workspace templates meeting notes", "weekly report template"],
        ["Can our company provide a standard skeleton layout for all fresh pages?"],
    ),
    _a(
        "search-operators",
        "Search operators",
        [
            "Use quotes for an exact phrase, author:name to filter by author, and in:folder to search one folder.",
            "Add before:2026-01-01 or after: with a date to filter by when a document last changed.",
        ],
        ["What search operators are there?", "How do I search for an exact phrase?"],
        ["author: in: before: operators"],
        ["How do I find pages a particular colleague wrote in the spring?"],
    ),
    _a(
        "shortcuts",
        "Keyboard shortcuts",
        [
            "Press Ctrl+K (Cmd+K on Mac) to open the command palette and Ctrl+/ to list every shortcut.",
            "Ctrl+Shift+M adds a comment and Ctrl+Alt+1 to 3 turn a line into a heading.",
        ],
        ["What keyboard shortcuts are there?"],
        ["Ctrl+K command palette", "Ctrl+Shift+M"],
        ["Which keys do I hit to jump quickly to any action?"],
    ),
    _a(
        "mobile-requirements",
        "Mobile app requirements",
        [
            "The iOS app needs iOS 16 or later; the Android app needs Android 10 or later.",
            "Both apps support dark mode, offline documents and push notifications.",
        ],
        ["What are the mobile app requirements?", "Does the mobile app support dark mode?"],
        ["iOS 16 Android 10"],
        ["Will the phone version run on my old handset from 2018?"],
    ),
]

_STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does for from get got had has have how i if in into is it "
    "its me my no not now of on or our so some than that the their them then there they this to too us was we "
    "what when where which who whom why will with would you your yours any all one".split()
)
_WORD = re.compile(r"[a-z0-9]+")


def content_words(text: str) -> set[str]:
    """Lower-case words without stop words, cut to their first five letters (a crude stem), for checking
    that a paraphrase shares no content word with its article."""
    return {word[:5] for word in _WORD.findall(text.lower()) if word not in _STOPWORDS}


@dataclass(frozen=True)
class Question:
    text: str
    kind: str  # one of CLASSES
    answer: str  # the slug of the article that answers it


def questions() -> list[Question]:
    return [
        Question(text, kind, article.slug)
        for article in ARTICLES
        for kind in CLASSES
        for text in getattr(article, kind)
    ]


def write_helpcenter(root: Path) -> Path:
    """One Markdown page per article under ``root``; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for article in ARTICLES:
        (root / f"{article.slug}.md").write_text(article.page() + "\n")
    return root
