"""A small labelled corpus for retrieval tests: 50 short documents of a fictional company, Northwind,
and for each one a question asked in other words than the document uses.

Written for these tests: every document holds facts no other one does, and questions paraphrase
rather than quote, so finding the right document takes the embedding model, not word overlap.
"""

from __future__ import annotations

from pathlib import Path

# (file name, document text, a question it answers)
DOCUMENTS: list[tuple[str, str, str]] = [
    ("vacation.md", "# Paid leave\n\nFull-time staff accrue 25 days of paid leave per year. Up to five unused days "
     "carry over into the next year; the rest lapse on 31 March.", "How many holiday days do employees get annually?"),
    ("parental.md", "# Parental leave\n\nNew parents receive 16 weeks of fully paid leave, which can be split into "
     "two blocks within the child's first year.", "How long is the paid leave after having a baby?"),
    ("expenses.md", "# Expense claims\n\nSubmit receipts in the finance portal within 30 days. Meals on business "
     "trips are reimbursed up to 45 euros per day.", "What is the daily food allowance when travelling for work?"),
    ("laptops.md", "# Laptops\n\nEngineers get a 16-inch laptop with 64 GB of memory, replaced every three years; "
     "other staff get a 14-inch model.", "How often is an engineer's computer replaced?"),
    ("vpn.md", "# Remote access\n\nConnect to the office network with the WireGuard client; profiles are issued by "
     "the IT desk and expire after 90 days.", "Which tool do I use to reach internal systems from home?"),
    ("passwords.md", "# Passwords\n\nPasswords need at least 14 characters. Use the company password manager and "
     "turn on a hardware security key for single sign-on.", "What is the minimum length for a login secret?"),
    ("onboarding.md", "# First week\n\nNew hires meet their buddy on Monday, finish security training by Wednesday "
     "and ship a small change to production by Friday.", "What should a new starter accomplish in their first days?"),
    ("office-berlin.md", "# Berlin office\n\nThe Berlin office is on Torstrasse 140, third floor. Bikes can be parked "
     "in the courtyard; the building opens at 7 am.", "Where can I leave my bicycle at the German site?"),
    ("office-lisbon.md", "# Lisbon office\n\nThe Lisbon office sits by the river in Alcantara. Lunch is catered on "
     "Tuesdays and Thursdays.", "On which days is food provided at the Portuguese location?"),
    ("kettle-x2.md", "# Kettle X2\n\nThe X2 kettle holds 1.7 litres, boils in 3 minutes and switches itself off "
     "when the jug runs dry.", "What is the capacity of the X2 water boiler?"),
    ("blender-b9.md", "# Blender B9\n\nThe B9 blender has a 1,200 watt motor and six speed settings; its glass jug "
     "is dishwasher safe.", "How powerful is the motor of the B9?"),
    ("toaster-t4.md", "# Toaster T4\n\nThe T4 toasts four slices at once and has a defrost button and a bagel "
     "mode that heats one side only.", "Can the T4 warm just one face of a bagel?"),
    ("fryer-f1.md", "# Air fryer F1\n\nThe F1 air fryer cooks with a 5.5 litre basket at up to 200 degrees "
     "Celsius and has eight presets.", "What is the highest temperature the F1 reaches?"),
    ("grinder-g3.md", "# Grinder G3\n\nThe G3 coffee grinder uses conical steel burrs with 40 grind settings from "
     "espresso to French press.", "How many coarseness levels does the G3 offer?"),
    ("returns.md", "# Returns\n\nUnused products can be sent back within 30 days of delivery for a full refund; "
     "the return label is free.", "How long do customers have to send an item back?"),
    ("warranty.md", "# Warranty\n\nAll appliances carry a two-year warranty covering defects in materials and "
     "workmanship, extended to five years for motors.", "How long are appliance motors covered against faults?"),
    ("shipping.md", "# Shipping\n\nOrders ship within two business days. Delivery inside the EU takes three to "
     "five days; express arrives the next day.", "How fast does an express order arrive?"),
    ("payments.md", "# Payments\n\nThe web shop accepts cards, PayPal and bank transfer. Invoices for business "
     "customers are due within 14 days.", "When must a company customer settle an invoice?"),
    ("gift-cards.md", "# Gift cards\n\nGift cards are valid for three years from purchase and can be combined "
     "with any other payment method.", "Do gift vouchers expire?"),
    ("loyalty.md", "# Loyalty programme\n\nMembers earn one point per euro spent; 500 points become a 10 euro "
     "voucher.", "How many points do I need for a discount coupon?"),
    ("recycling.md", "# Recycling\n\nOld appliances are collected free of charge when a new one is delivered; "
     "batteries go in the store's collection box.", "Will you take away my broken toaster when the new one comes?"),
    ("descaling.md", "# Descaling\n\nDescale kettles every four weeks in hard-water areas using citric acid; "
     "never use vinegar on the heating plate.", "How often should limescale be removed from a kettle?"),
    ("spare-parts.md", "# Spare parts\n\nSpare jugs, blades and filters are sold for at least seven years after "
     "a model is discontinued.", "For how long can I buy replacement pieces for old models?"),
    ("support-hours.md", "# Support hours\n\nThe support line is open weekdays 8 am to 8 pm and Saturdays 9 am to "
     "1 pm, Central European Time.", "Can I call the help desk on a Saturday?"),
    ("chat-support.md", "# Chat support\n\nLive chat answers within two minutes on average; outside opening hours a "
     "ticket is created automatically.", "What happens if I open a chat at night?"),
    ("deploys.md", "# Deploys\n\nProduction deploys run from the main branch through the release pipeline; deploys "
     "are frozen on Fridays after 3 pm.", "Is shipping code allowed late on Friday afternoon?"),
    ("incidents.md", "# Incidents\n\nPage the on-call engineer for customer-facing outages. Post-mortems are "
     "written within five working days and are blameless.", "When is the review of an outage due?"),
    ("on-call.md", "# On-call\n\nOn-call rotations last one week. Each shift is paid a flat 400 euros plus "
     "overtime for night callouts.", "What is the compensation for a week of being on pager duty?"),
    ("code-review.md", "# Code review\n\nEvery change needs one approving review; changes to payments code need "
     "two, one from the payments team.", "How many approvals does a change to billing code require?"),
    ("testing.md", "# Testing\n\nUnit tests run on every push; the end-to-end suite runs nightly against the "
     "staging environment.", "When do the full browser tests run?"),
    ("databases.md", "# Databases\n\nThe shop runs on PostgreSQL 16 with a hot standby in a second zone; backups "
     "are kept for 35 days.", "How long are database snapshots retained?"),
    ("observability.md", "# Observability\n\nMetrics go to Prometheus, logs to Loki and traces to Tempo; dashboards "
     "live in Grafana.", "Where are request traces stored?"),
    ("security-training.md", "# Security training\n\nEveryone completes phishing awareness training each quarter; "
     "failing twice means a one-to-one session.", "How frequently must staff redo the anti-phishing course?"),
    ("data-retention.md", "# Data retention\n\nCustomer order data is kept for ten years for tax purposes; marketing "
     "consent records for three years.", "How long do you store purchase records?"),
    ("privacy-requests.md", "# Privacy requests\n\nRequests to access or erase personal data are answered within 30 "
     "days by the data protection officer.", "Who handles a request to delete my personal information?"),
    ("sustainability.md", "# Sustainability\n\nNorthwind's warehouses run on solar power since 2024, and packaging "
     "is 95 percent recycled cardboard.", "What share of the packaging material is recycled?"),
    ("warehouse.md", "# Warehouse\n\nThe central warehouse in Leipzig ships 12,000 parcels a day and works in two "
     "shifts.", "How many packages leave the distribution centre daily?"),
    ("suppliers.md", "# Suppliers\n\nSuppliers must sign the code of conduct and pass an audit every two years, "
     "covering labour and safety standards.", "How often are vendors inspected?"),
    ("pricing.md", "# Price matching\n\nIf an authorised dealer sells the same model for less within 14 days of "
     "purchase, the difference is refunded.", "Do you refund the gap if another shop is cheaper?"),
    ("student-discount.md", "# Student discount\n\nStudents with a valid ID get 15 percent off full-price "
     "appliances, once per calendar year.", "Is there a reduction for people at university?"),
    ("b2b.md", "# Business accounts\n\nBusiness accounts get volume pricing from ten units and a dedicated account "
     "manager.", "From what order size do companies receive bulk rates?"),
    ("careers.md", "# Careers\n\nOpen roles are listed on the careers page; interviews have three stages and end "
     "with a take-home task.", "What does the hiring process look like?"),
    ("referrals.md", "# Referrals\n\nStaff who refer a hire receive a 2,000 euro bonus after the new colleague "
     "passes probation.", "What do I get for recommending a friend who joins?"),
    ("probation.md", "# Probation\n\nProbation lasts six months with check-ins at months two and five.",
     "How long is the trial period for new employees?"),
    ("learning-budget.md", "# Learning budget\n\nEach employee has 1,500 euros a year for courses, books and "
     "conferences, plus three study days.", "How much money is available for professional development?"),
    ("remote-work.md", "# Remote work\n\nStaff may work remotely up to three days a week and from abroad for up to "
     "four weeks a year.", "How long may I work from another country?"),
    ("equipment-home.md", "# Home office\n\nA one-time 600 euro allowance covers a desk chair, monitor or other "
     "home-office equipment.", "Is there money for setting up a workspace at home?"),
    ("travel-booking.md", "# Travel booking\n\nBook trains for journeys under six hours; flights need manager "
     "approval and economy class.", "When am I allowed to fly instead of taking the train?"),
    ("company-history.md", "# History\n\nNorthwind was founded in 1998 in Hamburg as a repair shop for kitchen "
     "appliances.", "In which year did the company start?"),
    ("board.md", "# Leadership\n\nThe company is led by CEO Marta Kowalski; the chief technology officer is Jonas "
     "Berg.", "Who runs technology at Northwind?"),
]


def write_corpus(root: Path) -> Path:
    """Write the documents under ``root`` and return it."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text, _ in DOCUMENTS:
        (root / name).write_text(text)
    return root
