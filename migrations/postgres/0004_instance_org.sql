-- The instance's own organisation: the first one made (at the dashboard's first start).
-- Its admins administer the instance, such as creating organisations. The dashboard
-- marks it when it starts, on stores made before this column too.
ALTER TABLE orgs ADD COLUMN instance BOOLEAN NOT NULL DEFAULT FALSE;
