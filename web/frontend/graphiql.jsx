// RecallQL's GraphiQL page, bundled by build.mjs into static/build/graphiql/ so that it works
// with no internet access: React, GraphiQL, Monaco and their CSS and fonts are all local files.
import './workers.js';
import 'graphiql/style.css';

import { useGraphiQL, useGraphiQLActions } from '@graphiql/react';
import { createGraphiQLFetcher } from '@graphiql/toolkit';
import { DOC_EXPLORER_PLUGIN } from '@graphiql/plugin-doc-explorer';
import { GraphiQL } from 'graphiql';
import { StrictMode, useEffect } from 'react';
import { createRoot } from 'react-dom/client';

import { DEFAULT_TABS } from './examples.js';

// The page is served by GET on the GraphQL endpoint itself, so that is where queries go, and where
// subscriptions go over a WebSocket (graphql-transport-ws). Each subscription opens its socket with the
// Headers tab's headers as connection_init's payload, which is where RecallQL reads a bearer token.
const url = `${window.location.origin}${window.location.pathname}`;
const fetcher = createGraphiQLFetcher({ url, subscriptionUrl: url.replace(/^http/, 'ws') });

// GraphiQL 5 fills the first tab's query from defaultTabs but not its variables; hand them over
// as initialVariables, and only on a first visit (later, the tabs saved in the browser win).
let firstVisit = true;
try {
  firstVisit = window.localStorage.getItem('graphiql:tabState') === null;
} catch {
  // storage disabled: GraphiQL starts from the defaults every time
}

// With authentication on, the schema cannot load before a token is in the Headers tab, and GraphiQL
// fetches it again only on Ctrl+Shift+R: the docs said "Error fetching schema" until then. While the
// schema is missing, a change of the headers fetches it again (once the typing pauses).
function SchemaAfterHeaders() {
  const headerEditor = useGraphiQL((state) => state.headerEditor);
  const missing = useGraphiQL((state) => !state.schema && Boolean(state.fetchError));
  const { introspect } = useGraphiQLActions();
  useEffect(() => {
    if (!headerEditor || !missing) return undefined;
    let timer;
    const listener = headerEditor.onDidChangeModelContent(() => {
      clearTimeout(timer);
      timer = setTimeout(() => introspect(), 400);
    });
    return () => {
      clearTimeout(timer);
      listener.dispose();
    };
  }, [headerEditor, missing, introspect]);
  return null;
}

function App() {
  return (
    <GraphiQL
      fetcher={fetcher}
      defaultTabs={DEFAULT_TABS}
      initialVariables={firstVisit ? DEFAULT_TABS[0].variables : undefined}
      defaultEditorToolsVisibility="variables"
      visiblePlugin={DOC_EXPLORER_PLUGIN}
      shouldPersistHeaders={false}
    >
      <SchemaAfterHeaders />
      <GraphiQL.Logo>
        <a className="recallql-home" href="./" title="RecallQL memory explorer">
          RecallQL
        </a>
      </GraphiQL.Logo>
    </GraphiQL>
  );
}

createRoot(document.getElementById('graphiql')).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
