INSERT INTO public.bjob (queue, payload) SELECT 'noop', '{}'::jsonb FROM generate_series(1,100);
